"""The Kubernetes API calls of ``tessera certs``: the only module of certs/ importing kubernetes.

Four calls (read/write a Secret, read/patch a MutatingWebhookConfiguration). Every
``ApiException`` is wrapped here, once, into an error that tells the operator what to do:
403 -> :class:`PermissionDenied` naming the missing rule, 404 -> :class:`NotFound`.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from certs.errors import KubeAccessError, NotFound, PermissionDenied
from certs.secret import SecretData

#: Where the rules of the certs Job are shipped; named in every 403 message.
RBAC_HINT = "the rules tessera certs needs are in manifests/overlays/self-signed/certs-rbac.yaml"


def _server_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return str(exc.reason or "").strip()
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return str(exc.reason or "").strip()


def wrap(exc: ApiException, what: str) -> KubeAccessError:
    """One ApiException as the error an operator can act on."""
    message = _server_message(exc)
    if exc.status == 403:
        return PermissionDenied(f"{what}: permission denied ({message}); {RBAC_HINT}")
    if exc.status == 404:
        return NotFound(f"{what}: not found ({message}); check the name and namespace")
    if exc.status == 409:
        return KubeAccessError(
            f"{what}: changed by someone else meanwhile ({message}); run again"
        )
    return KubeAccessError(f"{what}: HTTP {exc.status} from the API server ({message})")


def load_api_client(kubeconfig: str | None, context: str | None = None) -> Any:
    """A client for ``kubeconfig``; in a pod without one, the pod's ServiceAccount."""
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            return client.ApiClient(cfg)
        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context
        )
    except (ConfigException, OSError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise KubeAccessError(f"cannot load Kubernetes credentials from {where}: {exc}") from exc


class KubeApi:
    """The four calls, over one ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any) -> None:
        self._core = client.CoreV1Api(api_client)
        self._admission = client.AdmissionregistrationV1Api(api_client)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise wrap(exc, what) from exc
        except (HTTPError, OSError) as exc:
            raise KubeAccessError(f"{what}: cannot reach the API server: {exc}") from exc

    # ------------------------------------------------------------------ secrets
    def get_secret(self, namespace: str, name: str) -> SecretData | None:
        what = f"get Secret {namespace}/{name}"
        try:
            secret = self._core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise wrap(exc, what) from exc
        except (HTTPError, OSError) as exc:
            raise KubeAccessError(f"{what}: cannot reach the API server: {exc}") from exc
        data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        meta = secret.metadata or client.V1ObjectMeta()
        return SecretData(
            type=secret.type or "Opaque",
            data=data,
            resource_version=meta.resource_version,
            labels=dict(meta.labels or {}),
        )

    def put_secret(self, namespace: str, name: str, secret: SecretData, exists: bool) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": secret.labels},
            "type": secret.type,
            "data": {k: base64.b64encode(v).decode() for k, v in secret.data.items()},
        }
        if exists:
            # resourceVersion makes the update conditional: a concurrent writer gets a 409
            # instead of one of us silently losing.
            body["metadata"]["resourceVersion"] = secret.resource_version
            self._call(f"update Secret {namespace}/{name}",
                       self._core.replace_namespaced_secret, name, namespace, body)
        else:
            self._call(f"create Secret {namespace}/{name}",
                       self._core.create_namespaced_secret, namespace, body)

    # ------------------------------------------------------------------ webhook configuration
    def get_webhook_bundles(self, configuration: str) -> list[tuple[str, bytes]]:
        """(webhook name, caBundle) for every webhook of the configuration."""
        found = self._call(
            f"get MutatingWebhookConfiguration {configuration}",
            self._admission.read_mutating_webhook_configuration, configuration,
        )
        result = []
        for hook in found.webhooks or []:
            raw = hook.client_config.ca_bundle if hook.client_config else None
            result.append((hook.name, base64.b64decode(raw) if raw else b""))
        return result

    def set_webhook_bundles(self, configuration: str, changes: list[tuple[int, str, bytes]]
                            ) -> None:
        """Set caBundle of the webhooks at the given positions (index, expected name, bundle).

        A JSON patch with a ``test`` of each webhook's name first: if the list changed since
        we read it, the patch fails (422) instead of writing a bundle into the wrong webhook.
        """
        ops: list[dict[str, Any]] = []
        for index, name, bundle in changes:
            ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": name})
            ops.append({
                "op": "add",  # add replaces an existing member of an object (RFC 6902 4.1)
                "path": f"/webhooks/{index}/clientConfig/caBundle",
                "value": base64.b64encode(bundle).decode(),
            })
        self._call(
            f"patch caBundle of MutatingWebhookConfiguration {configuration}",
            self._admission.patch_mutating_webhook_configuration, configuration, ops,
        )
