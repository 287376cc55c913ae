"""The service's database layer: URL handling, engines, the one MetaData, the dialect seam, migrations."""
