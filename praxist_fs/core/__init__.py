"""The sans-IO scheduling core.

Rule 1: every scheduling decision and every job transition lives in this
package. Rule 2: this package knows no paths, clocks, pids as live processes,
threads or files; inputs are events that carry their own time, outputs are
effects for the adapters to carry out. A test fails if anything here imports
an I/O module.
"""
