"""The services' error types: InputError (bad input, naming file, line and field) and PermissionDenied. Defined in
labeler/errors.py, the ground floor forms.py shares, so that the import arrows point down from here."""
from labeler.errors import InputError, PermissionDenied

__all__ = ["InputError", "PermissionDenied"]
