from tests.program import standin

# Until raya.render (issue 4) imports, the program is tested with the contract's stand-in.
try:
    import raya.render  # noqa: F401
except ImportError:
    standin.install()
