"""The offline proposal policy: tunables, source transforms and the mutator over them."""
