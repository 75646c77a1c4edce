"""What the Snakemake workflow adds on top of the library: the wrapper every job's script runs in
(`job`) and what each job asks the scheduler for (`resources`)."""
