"""Kept for code written before the layout change (``from vlmdata.validate import validate``); the
module is ``vlmdata.dataset.validate`` and the function is also ``vlmdata.validate``.

Importing this module makes it the attribute ``vlmdata.validate`` (Python sets a submodule on its
package), which would hide the function of the same name that ``vlmdata`` re-exports; the module is
therefore callable and forwards to the function, so ``vlmdata.validate(path)`` works either way.
"""

import sys
import types

from vlmdata.dataset.validate import Problem, ValidationReport, check_sample, validate

__all__ = ["Problem", "ValidationReport", "check_sample", "validate"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return validate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
