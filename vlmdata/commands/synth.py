"""vlmdata synth (being written)"""

from __future__ import annotations


def add_parser(sub):
    return sub.add_parser("synth", help="synthetic shards from a profile, or mock shards (in progress)")


def run(args) -> int:
    from ..console import UserError

    raise UserError("synth is not finished yet")
