"""The error root and the families the runtime raises, as the runtime's modules import them.

Every public exception lives in :mod:`kernos.errors` (its docstring draws the whole tree); these
names are the same classes.

A model request's own failures are pydantic-ai's ``ModelAPIError`` family, whatever the provider;
:func:`kernos.runtime.model_failure` turns them (and :class:`EmptyAnswers`) into one line.
"""

from __future__ import annotations

from kernos.errors import ConfigError as ConfigError
from kernos.errors import EmptyAnswers as EmptyAnswers
from kernos.errors import KernosError as KernosError
