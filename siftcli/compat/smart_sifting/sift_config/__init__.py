"""Mirrors the module path of SageMaker smart sifting's package of the same name."""
