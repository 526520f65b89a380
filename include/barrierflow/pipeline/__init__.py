"""The pipeline model, Spark-free: a pipeline is a graph of stages, and what each stage runs
with (its derived spec, options, inputs) is decided here once, for every caller."""
