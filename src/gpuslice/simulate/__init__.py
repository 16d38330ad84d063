"""Trace-driven cluster simulator: replay a job trace on a simulated cluster, real allocator.

Modules, in the order to read them:
  command.py    `gpuslice simulate`: load files, replay once per policy, print (entry point)
  cluster.py    cluster file (YAML) -> NodeInventory list, strict validation
  trace.py      trace file (JSON lines / YAML) -> Job list, via gpuslice.dialects
  engine.py     discrete-event replay: event order, FIFO-with-backfill queue, outcomes
  metrics.py    time-weighted usage (via allocator.footprint), fragmentation, percentiles
  report.py     rich table (a column per policy) and JSON lines
  jobs.py       `--jobs FILE`: each job's node, GPUs, start, wait or reason (CSV / JSON lines)
  _yaml.py      YAML reading with bounded work (aliases, depth, huge numbers)
Formats and metric definitions: docs/simulate.md. Imports nothing here, so `--help` stays fast.
Tests: tests/unit/simulate/, tests/unit/test_cli_simulate.py, tests/golden/simulate_small.*
"""
