"""End-to-end tests with the real harnesses against a scripted fake model (see README.md)."""
