"""S3 audio store and Redis cache: the only code that talks to them."""
