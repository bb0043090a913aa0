"""HTTP layer: thin starlette adapters over the pure render/derender modules."""
