"""SageMaker smart-sifting code in, siftcli's engine underneath: the same names, so only the imports change."""
