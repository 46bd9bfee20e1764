"""The `survivor` command line, one module per group of commands; survivor/commands/main.py assembles them."""
