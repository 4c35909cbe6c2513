"""YAML in, Recipe out: the recipe's schema, the bounded YAML reader and --set, and where the shipped recipes are."""
