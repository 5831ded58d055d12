"""The reproduction machinery: typed configs, claims and their statistics, code
fingerprints and the result cache, plotting, failures, compilation cache."""
