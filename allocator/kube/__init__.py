"""The Kubernetes API adapters: the client (the only importer of ``kubernetes``), its libcurl
pool, leader election and the Events the allocator records."""
