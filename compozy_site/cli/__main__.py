"""`python -m compozy_site.cli`."""

from compozy_site.cli.main import main

main()
