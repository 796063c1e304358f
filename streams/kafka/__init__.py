"""Everything ttsflow builds on confluent-kafka: client configs, topics, the transactional
producer and the partitioned consumer the worker composes.

Rooms: :mod:`~streams.kafka.config` (the one place a client config is built),
:mod:`~streams.kafka.topics` (every topic's name and shape), :mod:`~streams.kafka.admin` (creating them, broker checks), :mod:`~streams.kafka.producer`
(bounded, retried transactional calls; a wedged producer replaced under the same
``transactional.id``), :mod:`~streams.kafka.consumer` (assignment, pause/resume, rewind to
the committed offsets). confluent_kafka itself is imported inside functions, so importing
this package is cheap.
"""

from streams.kafka.admin import ensure_done_topic, ensure_topics, wait_for_broker
from streams.kafka.config import client_config, consumer_config, producer_config, reader_config, transactional_config
from streams.kafka.topics import TopicSpec, topic_specs

__all__ = ["TopicSpec", "client_config", "consumer_config", "ensure_done_topic", "ensure_topics", "producer_config", "reader_config",
           "topic_specs", "transactional_config", "wait_for_broker"]
