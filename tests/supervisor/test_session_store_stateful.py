"""SessionStore against a plain-dict model, with actor deaths interleaved (hypothesis)."""

from __future__ import annotations

from typing import Any

import pykka
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from supervisor import SessionAlreadyExists, SessionNotFound, SessionStore, terminate
from tests.supervisor.helpers import WAIT, Worker, crash

IDS = st.sampled_from(["a", "b", "c", "d"])
TENANTS = st.sampled_from(["t1", "t2", "default"])
KEYS = st.sampled_from([None, "k1", "k2"])


class StoreModel(RuleBasedStateMachine):
    """Every operation is applied to the store and to a dict; they must always agree."""

    def __init__(self) -> None:
        super().__init__()
        self.store = SessionStore()
        self.model: dict[str, tuple[pykka.ActorRef[Any], str, str | None]] = {}
        self.actors: list[pykka.ActorRef[Any]] = []

    @rule(sid=IDS, tenant=TENANTS, key=KEYS)
    def create(self, sid: str, tenant: str, key: str | None) -> None:
        ref = Worker.start()
        self.actors.append(ref)
        if sid in self.model:
            with pytest.raises(SessionAlreadyExists):
                self.store.create(sid, ref, tenant_id=tenant, api_key=key)
            return
        entry = self.store.create(sid, ref, tenant_id=tenant, api_key=key)
        assert (entry.session_id, entry.tenant_id) == (sid, tenant)
        self.model[sid] = (ref, tenant, key)

    @rule(sid=IDS)
    def get(self, sid: str) -> None:
        if sid in self.model:
            assert self.store.get(sid).actor_ref is self.model[sid][0]
        else:
            with pytest.raises(SessionNotFound):
                self.store.get(sid)

    @rule(sid=IDS)
    def delete(self, sid: str) -> None:
        self.store.delete(sid)
        self.model.pop(sid, None)

    @rule(sid=IDS, how=st.sampled_from(["crash", "stop", "system_exit"]))
    def actor_dies(self, sid: str, how: str) -> None:
        if sid not in self.model:
            return
        ref = self.model.pop(sid)[0]
        if how == "crash":
            crash(ref)
        elif how == "stop":
            ref.stop(block=False)
        else:
            crash(ref, SystemExit(1))
        assert terminate(ref, WAIT)  # returns once its Down notices are out

    @rule(tenant=TENANTS)
    def list_by_tenant(self, tenant: str) -> None:
        got = [e.session_id for e in self.store.list_by_tenant(tenant)]
        want = [sid for sid, (_, t, _) in self.model.items() if t == tenant]
        assert sorted(got) == sorted(want)

    @rule(key=st.sampled_from(["k1", "k2", "nope"]))
    def list_by_api_key(self, key: str) -> None:
        got = [e.session_id for e in self.store.list_by_api_key(key)]
        want = [sid for sid, (_, _, k) in self.model.items() if k == key]
        assert sorted(got) == sorted(want)

    @invariant()
    def agrees_with_model(self) -> None:
        assert self.store.count() == len(self.model)
        assert {e.session_id for e in self.store.list()} == set(self.model)
        self.store._check_consistency()

    def teardown(self) -> None:
        for ref in self.actors:
            assert terminate(ref, WAIT)


StoreModel.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    derandomize=True,
    database=None,
)
TestStoreModel = StoreModel.TestCase
