"""Modal screens: confirmations, the config form, help."""
