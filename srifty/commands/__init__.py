"""CLI commands that live in their own modules (registered in srifty.cli.LAZY_COMMANDS).

A command module imports only click and light srifty modules at top level; heavy
libraries (torch, scikit-learn, boto3) are imported inside the command function.
"""
