"""cbhook as `cbconsole setup` writes it into a harness's hooks: `<python> -I -S <this file> [cbhook's options]`.

The console script `cbhook` works too, but it is a wrapper that Python starts with `site` (every `.pth` of
the environment; an editable install's finder imports pathlib) and that imports `re`: more than cbhook's own
work per tool call. `-I` keeps the current directory and PYTHON* variables out (an agent's workspace may hold
a `json.py`), `-S` skips `site`; this file puts back only the directory its own package is in.
"""

import sys

if __name__ == "__main__":
    here = __file__ if __file__.startswith("/") else __import__("posix").getcwd() + "/" + __file__
    sys.path.append(here.rpartition("/")[0].rpartition("/")[0])  # the directory holding `breaker`
    from breaker.hook import main

    sys.exit(main())
