"""The CLI's commands, one module per command group; rendering lives in render.py."""
