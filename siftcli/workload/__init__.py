"""Recipe in, Workload out: the data and its splits, tokenized rows, the model (and a teacher), the loss, augmentation."""
