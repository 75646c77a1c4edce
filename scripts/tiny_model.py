# Rule tiny_model: build and briefly pre-train the embedded tiny Jac model (train-pool drivers only).
from jacrl.backends.config import TinyModelConfig
from jacrl.models.tiny import build_tiny_model, driver_paths_from_tasks
from jacrl.workflow import logged

with logged(snakemake):
    drivers = driver_paths_from_tasks(snakemake.input.trainpool)
    build_tiny_model(snakemake.output[0], drivers, TinyModelConfig(**snakemake.params.cfg), threads=snakemake.threads)
