"""The writer's metrics (``promtext``), in a registry of its own (tests run several in one process)."""

from __future__ import annotations

from promtext import Counter, Gauge, Registry


class WriterMetrics:
    def __init__(self) -> None:
        self.registry = Registry()
        self.writes = Counter(
            "nfd_lite_writes", "PATCH requests that changed the Node", registry=self.registry
        )
        self.syncs = Counter(
            "nfd_lite_syncs", "Sync passes completed, with or without a write", registry=self.registry
        )
        self.rejected = Counter(
            "nfd_lite_rejected_lines",
            "Feature-file lines (or whole files) rejected, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.capped = Gauge(
            "nfd_lite_capped",
            "Files, files over the byte cap, or labels dropped by each cap at the last scan, by cap",
            ["cap"],
            registry=self.registry,
        )
        self.conflicts = Counter(
            "nfd_lite_conflicts",
            "Desired labels already set by someone else and left alone",
            registry=self.registry,
        )
        self.api_errors = Counter(
            "nfd_lite_api_errors",
            "Failed API requests, by HTTP code (or 'connection')",
            ["code"],
            registry=self.registry,
        )
        self.last_sync = Gauge(
            "nfd_lite_last_successful_sync_timestamp_seconds",
            "Unix time the Node was last known to match the feature files",
            registry=self.registry,
        )
        self.labels_current = Gauge(
            "nfd_lite_labels_current",
            "1 when the Node as last seen carries every label of the feature files this writer may set "
            "(nothing left to write, nothing held back, no key set by another writer); else 0",
            registry=self.registry,
        )
        self.node_seen = Gauge(
            "nfd_lite_node_seen_timestamp_seconds",
            "Unix time the own-Node watch last delivered the Node, an event or a bookmark",
            registry=self.registry,
        )
        self.refused = Gauge(
            "nfd_lite_refused_labels",
            "Labels the admission policy refused, held back and tried again slowly",
            registry=self.registry,
        )
        self.owned = Gauge(
            "nfd_lite_owned_labels", "Labels this writer owns on its Node", registry=self.registry
        )
        self.admission_policy_enforced = Gauge(
            "nfd_lite_admission_policy_enforced",
            "1 while the last self-check found the admission policy fencing this writer; 0 when it found "
            "it not enforced (/readyz fails), or before the first check, or when it is not checked",
            registry=self.registry,
        )
        # Computed when read (Service sets the functions): how long the API server has not answered.
        self.api_unreachable = Gauge(
            "nfd_lite_api_unreachable",
            "1 while the API server has not answered for longer than the bound (/readyz fails), else 0",
            registry=self.registry,
        )
        self.api_unreachable_seconds = Gauge(
            "nfd_lite_api_unreachable_seconds",
            "Seconds since the API server last answered, while a request fails unanswered; else 0",
            registry=self.registry,
        )
