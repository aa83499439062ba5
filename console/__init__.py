"""cbconsole's operator console (Textual) and its command line. A client of the guard server."""
