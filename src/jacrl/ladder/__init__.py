"""The ladder: result rows from eval cells, statistics, and the pivot table and plot."""
