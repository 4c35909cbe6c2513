"""A Hugging Face Trainer or a LightningModule in, the same with a sifting training loader out."""
