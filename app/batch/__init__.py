"""The scoring pipeline of `capscope score` and `features` (`pipeline`): input
rows read lazily (`inputs`), runs resumed (`resume`), batches scored here or on
a Ray cluster (`engine_ray`)."""
