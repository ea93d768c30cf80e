"""The virtual tree of the mount, without FUSE: what a name resolves to, its attributes, what it opens to.

:mod:`.root` (the tree and its top), :mod:`.partitions` (what every node asks for its partition),
:mod:`.nodes` (the shapes and keys), :mod:`.partition_nodes` and :mod:`.segment_nodes` (a partition
folder's children), :mod:`.handles` (open files), :mod:`.append` (the ``append`` file), :mod:`.inodes`
(inode numbers and lookup counts), :mod:`.names` (the names and how they parse). Imports
:mod:`kafkafs.fs.views`, never the adapter above it.
"""
