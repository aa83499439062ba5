"""Wiring harnesses to the guard: `cbconsole setup HARNESS` writes the hook configuration into a harness's
own settings file, `cbconsole doctor` checks everything that can leave agents unguarded without a word.

Both run from the user's shell only (nothing on the guard's sockets reaches them), never import the
console, and start fast: no guard needs to be running for `setup`.
"""
