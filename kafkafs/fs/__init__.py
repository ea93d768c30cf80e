"""The mount, in three rooms (imports point down only; ``python -m kafkafs._devtools.layers`` checks it):

``kafkafs.fs``
    The pyfuse3 adapter: operations (the errno boundary), worker threads, the kernel's cache
    invalidation, the mount's checks and lifecycle, the daemon, the ``mount.kafkafs`` helper. The only
    code that imports pyfuse3 or trio.
``kafkafs.fs.tree``
    The virtual tree without FUSE: names, nodes (partition folders and their files, ``segments/``),
    open-file handles, inode numbers, the ``append`` file. Maps names to views; never renders.
``kafkafs.fs.views``
    What a partition looks like as files, without FUSE or the tree: the partition's state, rendering,
    layouts and their cache, sizing, ranges, reading, one record, the streams of ``records.jsonl``,
    and ``kafkafs index``. Its module :mod:`.views.layout` says the words (piece, layout, span,
    composition, generation).
"""
