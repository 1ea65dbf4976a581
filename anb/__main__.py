"""``python -m anb``: the same as the ``anb`` console script."""
from anb.cli import main

main()
