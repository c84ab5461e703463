"""`python -m compozy.cli`."""

from compozy.cli.main import main

main()
