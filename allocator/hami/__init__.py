"""HAMi's device plugin as Tessera's node agent: its wire formats, its node inventory, the
annotations a bind writes for it, and its node lock (docs/hami.md)."""
