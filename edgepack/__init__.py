from importlib.metadata import version as _v, PackageNotFoundError
try:
    __version__ = _v("edgepack")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+src"
