//! kvrs-queue: Keyed work queue, retry backoff and expectations for kvrs controllers.
