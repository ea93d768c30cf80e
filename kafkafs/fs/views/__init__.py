"""What a partition looks like as files, without FUSE and without the tree: bytes and sizes.

:mod:`.partition` (one partition's state), :mod:`.render` (records into JSON lines), :mod:`.layout`
(pieces, layouts and spans: the words of the views), :mod:`.layoutcache` (layouts kept across
mounts), :mod:`.sizing` (laying segments out, on many threads), :mod:`.ranges` (by-offset and by-time
ranges), :mod:`.reading` (bytes of a view from its pieces), :mod:`.record` (one record by offset),
:mod:`.streams` (the generations of ``records.jsonl``), :mod:`.prefill` (``kafkafs index``). Imports
only the engine (:mod:`kafkafs.storage`) and the codecs (:mod:`kafkafs.format`).
"""
