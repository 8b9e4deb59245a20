"""eventsourcing's own conformance suites, run against coder_es.store.lmdb.

Mirrors how the library tests its sqlite and postgres modules: each abstract test case is
subclassed with a ``create_recorder`` (or an environment) that selects our module.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, ClassVar
from unittest import TestCase
from uuid import UUID, uuid4

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    IntegrityError,
    ProcessRecorder,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.tests.application import ExampleApplicationTestCase
from eventsourcing.tests.persistence import (
    AggregateRecorderTestCase,
    ApplicationRecorderTestCase,
    InfrastructureFactoryTestCase,
    NonInterleavingNotificationIDsBaseCase,
    ProcessRecorderTestCase,
    TrackingRecorderTestCase,
)
from eventsourcing.tests.projection import (
    AggregateEventCountersProjectionTestCase,
    EventCountersView,
    EventCountersViewTestCase,
    EventSourcedProjectionTestCase,
)
from eventsourcing.utils import Environment

from coder_es.store.lmdb import (
    LMDBAggregateRecorder,
    LMDBApplicationRecorder,
    LMDBFactory,
    LMDBProcessRecorder,
    LMDBTrackingRecorder,
)
from coder_es.store.lmdb_env import open_stores

MODULE = "coder_es.store.lmdb"


class WithLMDBStore(TestCase):
    """A fresh store directory per test; every factory opened on it is closed afterwards."""

    durability = "durable"

    def setUp(self) -> None:
        super().setUp()
        self.store_dir = tempfile.mkdtemp(prefix="coder_es_lmdb_")
        self._factories: list[InfrastructureFactory[Any]] = []

    def tearDown(self) -> None:
        for factory in self._factories:
            factory.close()
        shutil.rmtree(self.store_dir, ignore_errors=True)
        super().tearDown()

    def lmdb_env(self) -> dict[str, str]:
        return {
            "PERSISTENCE_MODULE": MODULE,
            "LMDB_PATH": self.store_dir,
            "LMDB_DURABILITY": self.durability,
        }

    def factory(self) -> LMDBFactory:
        factory = InfrastructureFactory.construct(Environment(env=self.lmdb_env()))
        assert isinstance(factory, LMDBFactory)
        self._factories.append(factory)
        return factory


class WithTextOriginatorID:
    def new_originator_id(self) -> UUID | str:
        return "test-" + str(uuid4())


class TestLMDBAggregateRecorder(WithLMDBStore, AggregateRecorderTestCase):
    def create_recorder(self) -> AggregateRecorder:
        return self.factory().aggregate_recorder()


class TestLMDBAggregateRecorderWithTextOriginatorID(
    WithTextOriginatorID, TestLMDBAggregateRecorder
):
    pass


class TestLMDBApplicationRecorder(WithLMDBStore, ApplicationRecorderTestCase[Any]):
    def create_recorder(self) -> ApplicationRecorder:
        return self.factory().application_recorder()

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


class TestLMDBApplicationRecorderCrashConsistent(TestLMDBApplicationRecorder):
    durability = "crash_consistent"


class TestLMDBApplicationRecorderWithTextOriginatorID(
    WithTextOriginatorID, TestLMDBApplicationRecorder
):
    pass


class TestLMDBTrackingRecorder(WithLMDBStore, TrackingRecorderTestCase):
    def create_recorder(self) -> TrackingRecorder:
        return self.factory().tracking_recorder()


class TestLMDBProcessRecorder(WithLMDBStore, ProcessRecorderTestCase):
    def create_recorder(self) -> ProcessRecorder:
        return self.factory().process_recorder()


class TestLMDBProcessRecorderWithTextOriginatorID(WithTextOriginatorID, TestLMDBProcessRecorder):
    pass


class TestLMDBNonInterleavingNotificationIDs(WithLMDBStore, NonInterleavingNotificationIDsBaseCase):
    def create_recorder(self) -> ApplicationRecorder:
        return self.factory().application_recorder()


class LMDBTrackingRecorderSubclass(LMDBTrackingRecorder):
    pass


class TestLMDBInfrastructureFactory(InfrastructureFactoryTestCase[LMDBFactory]):
    def setUp(self) -> None:
        self.store_dir = tempfile.mkdtemp(prefix="coder_es_lmdb_")
        self.env = Environment("TestCase")
        self.env["PERSISTENCE_MODULE"] = MODULE
        self.env["LMDB_PATH"] = self.store_dir
        super().setUp()

    def tearDown(self) -> None:
        super().tearDown()
        shutil.rmtree(self.store_dir, ignore_errors=True)

    def expected_factory_class(self) -> type[LMDBFactory]:
        return LMDBFactory

    def expected_aggregate_recorder_class(self) -> type[AggregateRecorder]:
        return LMDBAggregateRecorder

    def expected_application_recorder_class(self) -> type[ApplicationRecorder]:
        return LMDBApplicationRecorder

    def expected_tracking_recorder_class(self) -> type[TrackingRecorder]:
        return LMDBTrackingRecorder

    def tracking_recorder_subclass(self) -> type[TrackingRecorder]:
        return LMDBTrackingRecorderSubclass

    def expected_process_recorder_class(self) -> type[ProcessRecorder]:
        return LMDBProcessRecorder

    def test_close_releases_the_environment(self) -> None:
        self.assertIn(os.path.realpath(self.store_dir), open_stores())
        self.factory.close()
        self.assertNotIn(os.path.realpath(self.store_dir), open_stores())


class WithLMDBInOSEnviron(TestCase):
    """Applications read PERSISTENCE_MODULE and LMDB_PATH from os.environ in these suites."""

    def setUp(self) -> None:
        super().setUp()
        self.store_dir = tempfile.mkdtemp(prefix="coder_es_lmdb_")
        self._saved = dict(os.environ)
        os.environ["PERSISTENCE_MODULE"] = MODULE
        os.environ["LMDB_PATH"] = self.store_dir

    def tearDown(self) -> None:
        os.environ.clear()
        os.environ.update(self._saved)
        shutil.rmtree(self.store_dir, ignore_errors=True)
        super().tearDown()


class TestExampleApplicationWithLMDB(WithLMDBInOSEnviron, ExampleApplicationTestCase):
    expected_factory_topic = "coder_es.store.lmdb:LMDBFactory"


# -- projections -------------------------------------------------------------------------------


class LMDBEventCountersView(LMDBTrackingRecorder, EventCountersView):
    """A materialised view whose counters change in the same transaction as its tracking record,
    so a projection restarted after a crash neither loses nor double-counts an event."""

    def __init__(self, store: Any, **kwargs: Any) -> None:
        super().__init__(store, **kwargs)
        # Sub-databases are opened up front: LMDB cannot open one inside a read transaction.
        self._counters = self._db("counters")

    def _get(self, name: bytes) -> int:
        with self.store.read() as txn:
            raw = txn.get(name, db=self._counters)
        return 0 if raw is None else int.from_bytes(raw, "big")

    def _incr(self, name: bytes, tracking: Tracking) -> None:
        db = self._counters

        def update(txn: Any) -> None:
            self._put_tracking(txn, tracking)
            raw = txn.get(name, db=db)
            count = 0 if raw is None else int.from_bytes(raw, "big")
            txn.put(name, (count + 1).to_bytes(8, "big"), db=db)

        self.write(update)

    def get_created_event_counter(self) -> int:
        return self._get(b"created")

    def get_subsequent_event_counter(self) -> int:
        return self._get(b"subsequent")

    def incr_created_event_counter(self, tracking: Tracking) -> None:
        self._incr(b"created", tracking)

    def incr_subsequent_event_counter(self, tracking: Tracking) -> None:
        self._incr(b"subsequent", tracking)


class TestLMDBEventCountersView(WithLMDBStore, EventCountersViewTestCase):
    def construct_event_counters_view(self) -> EventCountersView:
        view = self.factory().tracking_recorder(LMDBEventCountersView)
        assert isinstance(view, LMDBEventCountersView)
        return view

    def test_failed_tracking_leaves_counters_unchanged(self) -> None:
        view = self.construct_event_counters_view()
        assert isinstance(view, LMDBEventCountersView)
        view.incr_created_event_counter(Tracking("upstream", 5))
        with self.assertRaises(IntegrityError):
            view.incr_created_event_counter(Tracking("upstream", 5))
        self.assertEqual(view.get_created_event_counter(), 1)


class TestAggregateEventCountersProjectionWithLMDB(
    WithLMDBStore, AggregateEventCountersProjectionTestCase
):
    view_class = LMDBEventCountersView
    env: ClassVar[dict[str, str]] = {}

    def setUp(self) -> None:
        super().setUp()
        type(self).env = self.lmdb_env()


class TestEventSourcedProjectionWithLMDB(WithLMDBStore, EventSourcedProjectionTestCase):
    env: ClassVar[dict[str, str]] = {}

    def setUp(self) -> None:
        super().setUp()
        type(self).env = self.lmdb_env()


del AggregateRecorderTestCase
del ApplicationRecorderTestCase
del TrackingRecorderTestCase
del ProcessRecorderTestCase
del NonInterleavingNotificationIDsBaseCase
del InfrastructureFactoryTestCase
del ExampleApplicationTestCase
del AggregateEventCountersProjectionTestCase
del EventSourcedProjectionTestCase
del EventCountersViewTestCase
