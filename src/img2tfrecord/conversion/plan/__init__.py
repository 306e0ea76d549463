"""Planning: the walk (or a --file-list), labels, splits and the shard cut, made once from the input and the options."""
