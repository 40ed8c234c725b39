"""Measure a dataset and compare two: ``measure`` (``profile_dataset``, the profile document, its
validation and loading), ``compare`` (KS statistics between two profiles), ``plots`` (matplotlib)."""

from vlmdata.profile.measure import ProfileError, ProfileOptions, load_profile, profile_dataset

__all__ = ["ProfileError", "ProfileOptions", "load_profile", "profile_dataset"]
