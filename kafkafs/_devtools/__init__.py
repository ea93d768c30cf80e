"""Tools for working on kafkafs itself (not used by kafkafs): ``python -m kafkafs._devtools.layers``
checks the rooms and their imports, ``python -m kafkafs._devtools.deadcode`` lists functions nothing
calls."""
