"""The themes cbconsole ships, installed as the package `console.shipped_themes` (see pyproject.toml).

A regular package, not a namespace one: setuptools' editable install cannot find a `package-dir`
mapped package without an `__init__.py` (pypa/setuptools#4943).
"""
