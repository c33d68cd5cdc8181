"""AdmissionReview in, (HTTP status, response body) out. No Flask here.

Two error channels, as the API server expects (CONTRACTS.md §1, admission.k8s.io/v1):
a malformed review is an HTTP 400 with a message; a pod we refuse is HTTP 200 with
``allowed: false`` and ``status: {code: 422, message}``.

Why 422 and not 403: the refusal says the pod's GPU request is *invalid* (core 150, fraction
1.5, …), which is what 422 Unprocessable Entity / reason ``Invalid`` means to Kubernetes clients;
403 Forbidden is the code of authorisation and policy denials (RBAC, PodSecurity), and would
send users looking at permissions.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

import jsonpatch

from tessera.logs import pod_context
from tessera.vocabulary import RequestError, TesseraError
from tessera.wire import WireError, check_object_meta, load_json
from webhook.config import WebhookConfig
from webhook.mutation import mutate_pod

logger = logging.getLogger(__name__)

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"
REFUSAL_CODE: Final = 422
OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class MalformedReview(TesseraError):
    """A request body that is not an ``admission.k8s.io/v1`` AdmissionReview."""


def admission_response(
    review: Mapping[str, Any],
    *,
    allowed: bool,
    patch: Sequence[Mapping[str, Any]] | None = None,
    code: int | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """The one place a response is built: it echoes apiVersion, kind and request.uid."""
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(
            json.dumps(list(patch), separators=(",", ":")).encode()
        ).decode("ascii")
    if code is not None or message is not None:
        response["status"] = {
            "code": code if code is not None else (200 if allowed else REFUSAL_CODE),
            "message": message or "",
        }
        if not allowed and code == REFUSAL_CODE:
            response["status"]["reason"] = "Invalid"
    return {"apiVersion": review["apiVersion"], "kind": review["kind"], "response": response}


def validate_review(raw: Any) -> Mapping[str, Any]:
    """The review, checked as far as we rely on it; raises :class:`MalformedReview`."""
    if not isinstance(raw, Mapping):
        raise MalformedReview("body must be a JSON object (an AdmissionReview)")
    if raw.get("apiVersion") != API_VERSION or raw.get("kind") != KIND:
        raise MalformedReview(
            f"expected apiVersion {API_VERSION!r} and kind {KIND!r}, got "
            f"{raw.get('apiVersion')!r} and {raw.get('kind')!r} (set admissionReviewVersions: [v1])"
        )
    request = raw.get("request")
    if not isinstance(request, Mapping):
        raise MalformedReview("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("AdmissionReview request has no uid")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise MalformedReview(
            f"request.operation {operation!r} is not one of {', '.join(OPERATIONS)}"
        )
    if operation in ("CREATE", "UPDATE") and not isinstance(request.get("object"), Mapping):
        raise MalformedReview(f"{operation} request has no object")
    if _is_pod(request) and operation == "CREATE":
        # Typed as the API server sends a Pod: past this point metadata is an object of
        # strings (log context, dialect parsing and mutation rely on it).
        try:
            check_object_meta(request["object"], "request.object")
        except WireError as exc:
            raise MalformedReview(str(exc)) from exc
    return raw


def _is_pod(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    return (
        isinstance(kind, Mapping)
        and kind.get("group", "") == ""
        and kind.get("kind") == "Pod"
        and not request.get("subResource")
    )


def _log_context(pod: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """``extra=`` for log calls about this pod. The pod has no uid yet at CREATE, so the review's
    uid identifies it."""
    context = pod_context(pod)
    context["namespace"] = context.get("namespace") or request.get("namespace")
    context["uid"] = request["uid"]
    return context


def admit(raw: Any, config: WebhookConfig) -> tuple[int, dict[str, Any]]:
    """Answer one review (already JSON-decoded). Never raises."""
    try:
        review = validate_review(raw)
    except MalformedReview as exc:
        logger.info("malformed admission review: %s", exc, extra={"outcome": "malformed"})
        return 400, {"code": 400, "message": f"malformed AdmissionReview: {exc}"}
    request = review["request"]
    if request["operation"] != "CREATE" or not _is_pod(request):
        # Resources are immutable after CREATE; other kinds are not ours.
        return 200, admission_response(review, allowed=True)
    pod: Mapping[str, Any] = request["object"]
    context = _log_context(pod, request)
    who = f"{context.get('namespace')}/{context.get('pod')}"
    try:
        mutation = mutate_pod(pod, config.mutation)
        if not mutation.changed:
            return 200, admission_response(review, allowed=True)
        patch = jsonpatch.JsonPatch.from_diff(pod, mutation.pod).patch
    except RequestError as exc:
        logger.info("refused pod %s: %s", who, exc, extra={**context, "outcome": "refused"})
        return 200, admission_response(
            review, allowed=False, code=REFUSAL_CODE, message=f"tessera: {exc}"
        )
    except Exception as exc:  # a bug must not become a 500 or a crash; say so clearly
        logger.exception(
            "internal error admitting pod %s", who, extra={**context, "outcome": "error"}
        )
        return 200, admission_response(
            review,
            allowed=False,
            code=500,
            message=f"tessera webhook internal error ({type(exc).__name__}: {exc}); "
            f"this is a bug, please report it with the webhook log",
        )
    logger.info(
        "admitted GPU pod %s%s: %s",
        who,
        " (dry run)" if request.get("dryRun") else "",
        mutation.request,
        extra={**context, "outcome": "mutated"},
    )
    return 200, admission_response(review, allowed=True, patch=patch)


def admit_body(body: bytes, config: WebhookConfig) -> tuple[int, dict[str, Any]]:
    """Answer one raw HTTP body. The nesting bound of :func:`load_json` also keeps mutation's
    deep copy and diff clear of Python's recursion limit."""
    try:
        raw = load_json(body)
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        logger.info("non-JSON admission body: %s", exc, extra={"outcome": "malformed"})
        return 400, {"code": 400, "message": f"body is not JSON: {exc}"}
    return admit(raw, config)
