"""An in-process Message-API ``Grid``: a ServerApp drives real ClientApps without Ray or a SuperLink.

:class:`InlineGrid` implements Flower's ``flwr.serverapp.Grid`` (``push_messages``,
``pull_messages``, ``send_and_receive``, …) by calling each node's ``ClientApp`` in this process,
with one persistent ``Context`` per node (``node_config`` holds ``partition-id`` and
``num-partitions``, as in Flower's simulation, or what ``node_configs`` gives each node). Messages are deep-copied on the way in and on the
way out, so the server and the clients never share objects — as over a network. A ClientApp that
raises answers with an error reply (``CLIENT_APP_RAISED_EXCEPTION``), as Flower's runtime does.
:func:`run_inline` runs a ``ServerApp`` against ``ClientApp``s to the end.
"""

from __future__ import annotations

import copy
import traceback
from typing import Iterable, Optional
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from ...errors import FedleakError


class InlineGrid(Grid):
    """``num_nodes`` nodes running ``client_app`` in this process (node ids 1…n unless given)."""

    def __init__(self, client_app, num_nodes: int, *, run_id: int = 1, run_config: Optional[dict] = None,
                 node_ids: Optional[list[int]] = None, node_configs: Optional[list[dict]] = None) -> None:
        if not callable(client_app):
            raise FedleakError(f"InlineGrid needs a flwr ClientApp, got {type(client_app).__name__}")
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
            raise FedleakError(f"InlineGrid needs at least one node, got {num_nodes!r}")
        node_ids = list(node_ids) if node_ids is not None else list(range(1, num_nodes + 1))
        if len(node_ids) != num_nodes or len(set(node_ids)) != num_nodes:
            raise FedleakError(f"InlineGrid needs {num_nodes} distinct node ids, got {node_ids}")
        self.client_app = client_app
        self._run = Run.create_empty(run_id)
        if node_configs is not None and (len(node_configs) != num_nodes
                                         or not all(isinstance(c, dict) for c in node_configs)):
            raise FedleakError(f"InlineGrid needs one node config (a dict) per node, got {node_configs!r}")
        configs = node_configs or [{"partition-id": i, "num-partitions": num_nodes} for i in range(num_nodes)]
        self._contexts = {node: Context(run_id, node, dict(configs[i]), RecordDict(), dict(run_config or {}))
                          for i, node in enumerate(node_ids)}
        self._replies: dict[str, Message] = {}

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: Optional[float] = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self._contexts)

    def _deliver(self, message: Message) -> Message:
        node = message.metadata.dst_node_id
        if node not in self._contexts:
            return Message(Error(ErrorCode.NODE_UNAVAILABLE, f"node {node} is not part of this grid"), reply_to=message)
        try:
            reply = self.client_app(copy.deepcopy(message), self._contexts[node])
        except Exception as exc:  # a failing client is an error reply, never a crashed server
            reason = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
            return Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason), reply_to=message)
        reply = copy.deepcopy(reply)
        reply.metadata.__dict__["_message_id"] = str(uuid4())
        return reply

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = str(uuid4())
            message.metadata.__dict__["_run_id"] = self._run.run_id
            self._replies[message.metadata.message_id] = self._deliver(message)
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: Optional[float] = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def run_inline(server_app: ServerApp, client_app, num_nodes: int, *, run_config: Optional[dict] = None,
               node_configs: Optional[list[dict]] = None) -> InlineGrid:
    """Run ``server_app`` to the end against ``num_nodes`` in-process ``client_app`` nodes
    (``node_configs``: each node's own config, as ``flower-supernode --node-config``; default the
    partition only, as Flower's simulation engine)."""
    if not isinstance(server_app, ServerApp):
        raise FedleakError(f"run_inline needs a flwr.serverapp.ServerApp, got {type(server_app).__name__}")
    grid = InlineGrid(client_app, num_nodes, run_config=run_config, node_configs=node_configs)
    context = Context(grid.run.run_id, SUPERLINK_NODE_ID, {}, RecordDict(), dict(run_config or {}))
    # the identity Flower's runtime gives the ServerApp process (messages take run and node ids from it)
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, grid.run.run_id, SUPERLINK_NODE_ID
    try:
        server_app(grid, context)
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved
    return grid
