"""`python -m hvdrun ...`: the same as the `hvdrun` command of this environment."""
from hvdrun import main

main()
