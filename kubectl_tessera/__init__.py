"""``kubectl tessera``: the operator's view of Tessera's cards (a kubectl plugin).

Layers, as everywhere in Tessera: :mod:`picture` turns listed nodes and pods into plain typed
data with the allocator's own readers; :mod:`inspection` (the ``inspect`` command),
:mod:`why`, :mod:`whatif` and :mod:`defrag` are pure functions over that picture built on the
allocator's fit and policy code (:mod:`placing` replays prioritize); :mod:`source` is the only
module that talks to the API server; :mod:`cli` is the thin shell that parses flags and
prints.
"""
