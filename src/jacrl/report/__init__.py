"""The Snakemake report's items: standalone HTML pages and figures rendered from the workflow's outputs.

Each function reads what the workflow wrote (the ladder rows, an adapter's `metrics.jsonl`, an
eval cell and its samples, the splits summary) and writes one report item atomically. The pages
carry their own style and a few lines of script (filtering, sorting): the report embeds them as
data URIs in iframes, so they can load nothing from anywhere else.
"""
