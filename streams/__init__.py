"""Everything that knows Kafka: the stage, the worker, the client, lag and scaling, the CLI."""
