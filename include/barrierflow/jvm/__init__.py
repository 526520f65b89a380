"""JVM artifacts from Maven Central: pinned in a lock file, downloaded once, verified by sha256.

The lock file (:data:`barrierflow.jvm.lockfile.DEFAULT_LOCK`, shipped in this package) names
every jar of every *set* (for example ``kafka-broker``: Apache Kafka's KRaft broker and all its
runtime dependencies) with its exact version and sha256. :mod:`barrierflow.jvm.install`
fetches the missing ones into a local Maven-layout cache and verifies every jar against the
lock; :mod:`barrierflow.jvm.classpath` hands a verified set's jars to whoever starts a JVM.
Nothing here resolves versions at run time: resolution happens once, when a maintainer
regenerates the lock (``python -m barrierflow.jvm lock``).
"""
