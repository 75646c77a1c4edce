"""What the Snakemake workflow adds on top of the library: the wrapper every job's script runs in
(`job`), what each job asks the scheduler for (`resources`), and the config parts and hashes a
cell records (`provenance`)."""
