"""Where a process sits in a cluster of actors feeding one learner over TensorFlow's RPC, and
whether it may listen and call: the cluster's layout, its shared secret, its errors.

    learner process:  learner_service.TrajectoryServer(address, ...)   the RPC server
    actor process:    service_client.LearnerClient(address, ...)       its client
    every call:       credentials.py (the secret proven for that one call)
    the messages:     wire.py

Cluster layout (the standard TF_CONFIG format, or --cluster with the same "cluster" part):
    {"cluster": {"learner": ["host:port"], "actor": ["host:port", ...]},
     "task": {"type": "actor", "index": 0}}
Only the learner listens (on its own address from the spec); actors only connect.

Only the cluster's own processes may call: every call proves that its
caller holds the cluster's shared secret (--cluster_secret_file, or IMPALA_CLUSTER_SECRET;
cluster_secret), as credentials.py's docstring tells. Without a secret nothing is checked:
allowed on loopback, or anywhere with --insecure_open_cluster (check_listen_address). The
synchronous learners of one process (the paper's "8 learners") are learner_strategy's.
"""
import ipaddress
import json
import os

import tensorflow as tf

# 2: messages start with a wire.MessageHeader; 3: the filter sync (filter_sync.py); 4: every
# call carries a credential (nonce, tag) first, and "ping"; 5: env_outputs gain `truncated`
# (structures.EnvOutput: one more bool [T+1] tensor in every trajectory message); 6: a
# credential is (challenge, counter, tag) for one call, the challenge issued by the service's
# "challenge" (so that a captured credential cannot be sent again).
PROTOCOL_VERSION = 6
LEARNER_JOB, ACTOR_JOB = "learner", "actor"
# Loopback: with no cluster given, nothing listens beyond this machine.
DEFAULT_LEARNER_ADDRESS = "localhost:8001"
# Where the cluster's secret is when no --cluster_secret_file names a file: the secret itself.
SECRET_ENVIRONMENT_VARIABLE = "IMPALA_CLUSTER_SECRET"


# The cluster's errors, which a process's start-up tells apart from its own bugs (a line and
# an exit code, no traceback): a spec that cannot work, a peer refused, a service gone.
class ClusterError(ValueError):
  """A cluster specification that cannot work."""


class PeerRejected(RuntimeError):
  """A service refused this peer or its data (secret, protocol or trajectory layout differs)."""


class ServiceUnavailable(ConnectionError):
  """A service (the learner, a replay service) did not answer within the retry budget."""


class LearnerUnavailable(ServiceUnavailable):
  """The learner did not answer within the retry budget."""


def cluster_secret(secret_file="", environ=None):
  """The cluster's shared secret: --cluster_secret_file's content, else IMPALA_CLUSTER_SECRET.

  Args:
    secret_file: a file holding the secret (any bytes; one trailing newline is dropped, as
      editors and `echo` add one), or "" to read the environment.
    environ: the environment (os.environ by default).

  Returns:
    bytes, or None when neither gives a secret.

  Raises:
    ClusterError: the file cannot be read or is empty (a mistake that would otherwise open the
      cluster or lock its own processes out).
  """
  environ = os.environ if environ is None else environ
  if secret_file:
    try:
      with open(secret_file, "rb") as f:
        secret = f.read()
    except OSError as error:
      raise ClusterError(
          f"Cannot read the cluster secret file {secret_file} "
          f"({error.strerror or error}); give --cluster_secret_file a file this user can "
          f"read, holding the same secret as the rest of the cluster.") from error
    secret = _without_newline(secret)
    if not secret:
      raise ClusterError(
          f"The cluster secret file {secret_file} is empty; write the secret into it, e.g. "
          f"python -c 'import secrets; print(secrets.token_hex(32))' > {secret_file} && "
          f"chmod 600 {secret_file}, and give every process of the cluster the same file.")
    return secret
  value = _without_newline(environ.get(SECRET_ENVIRONMENT_VARIABLE, "").encode())
  return value or None


def _without_newline(data):
  return data[:-2] if data.endswith(b"\r\n") else data[:-1] if data.endswith(b"\n") else data


def is_loopback(address):
  """Whether "host:port" (or "[v6]:port") names this machine only: localhost, 127.x.x.x, ::1."""
  host = address.rpartition(":")[0].strip("[]").lower()
  if host == "localhost":
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def check_listen_address(address, secret, insecure_open_cluster, service="learner"):
  """Whether a service (`service`: "learner", "replay service") may listen on `address`: its
  console lines, or an error.

  A service without a secret answers anyone who reaches it; that is fine on loopback and
  nowhere else unless the user says so (--insecure_open_cluster).

  Returns:
    list of console lines (a warning for an open non-loopback address; a note that the
    traffic is not encrypted for a protected one); empty on loopback.

  Raises:
    ClusterError: a non-loopback address, no secret, and no --insecure_open_cluster.
  """
  if is_loopback(address):
    return []
  if secret is None and not insecure_open_cluster:
    raise ClusterError(
        f"the {service} at {address} would accept anyone who reaches it (read the model, "
        f"train it on anything); set a secret with --cluster_secret_file=PATH or "
        f"{SECRET_ENVIRONMENT_VARIABLE} (the launcher generates one), or pass "
        f"--insecure_open_cluster on a network you trust.")
  if secret is None:
    return [f"WARNING: --insecure_open_cluster: {address} accepts anyone who reaches it; "
            f"they can read the model and train it on anything they send."]
  return [f"Calls to {address} must prove the cluster's secret; they are not encrypted: on a "
          f"network you do not trust, listen on localhost and tunnel (ssh -N -L) or use "
          f"WireGuard."]


def parse_cluster(cluster_json="", environ=None):
  """The cluster as {job: [addresses]}, from --cluster or else TF_CONFIG.

  Args:
    cluster_json: JSON {"learner": [...], "actor": [...]} (the "cluster" part of TF_CONFIG),
      or "" to read TF_CONFIG.
    environ: the environment (os.environ by default).

  Returns:
    dict job -> list of "host:port"; {"learner": [DEFAULT_LEARNER_ADDRESS]} when neither is
    given.

  Raises:
    ClusterError: malformed JSON, or no single learner address.
  """
  environ = os.environ if environ is None else environ
  source = "--cluster"
  text = cluster_json
  if not text and environ.get("TF_CONFIG"):
    source, text = "TF_CONFIG", environ["TF_CONFIG"]
  if not text:
    return {LEARNER_JOB: [DEFAULT_LEARNER_ADDRESS]}
  try:
    value = json.loads(text)
  except ValueError as error:
    raise ClusterError(f"{source} is not valid JSON: {error}") from error
  cluster = value.get("cluster", value) if source == "TF_CONFIG" else value
  if not isinstance(cluster, dict) or not isinstance(cluster.get(LEARNER_JOB), list) or len(
      cluster[LEARNER_JOB]) != 1:
    raise ClusterError(f"{source} must name exactly one learner address, e.g. "
                       f'{{"learner": ["host:8001"], "actor": ["host2:8002"]}}; got {text!r}.')
  return {job: [str(a) for a in addresses] for job, addresses in cluster.items()}


def task_from_environment(environ=None):
  """(job_name, task index) from TF_CONFIG's "task", or (None, None)."""
  environ = os.environ if environ is None else environ
  if not environ.get("TF_CONFIG"):
    return None, None
  task = json.loads(environ["TF_CONFIG"]).get("task", {})
  return task.get("type"), task.get("index")


def learner_strategy(num_learners):
  """None for one learner; else a MirroredStrategy over `num_learners` devices.

  The paper's "8 learners" (Figure 1 right, Table 3) are synchronous learners on 8 GPUs: with
  that many GPUs they are used; otherwise the CPU is split into `num_learners` logical devices
  (same arithmetic, for testing and for CPU clusters). Must run before TensorFlow has
  initialised its devices (before any variable or op).

  Raises:
    ValueError: num_learners < 1, or too few GPUs for the GPUs to be used and TensorFlow
      already initialised.
  """
  if num_learners < 1:
    raise ValueError(f"--num_learners must be at least 1, got {num_learners}.")
  if num_learners == 1:
    return None
  gpus = tf.config.list_physical_devices("GPU")
  if len(gpus) >= num_learners:
    devices = [f"/gpu:{i}" for i in range(num_learners)]
  elif gpus:
    raise ValueError(f"--num_learners={num_learners} needs as many GPUs; this machine has "
                     f"{len(gpus)}.")
  else:
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
      tf.config.set_logical_device_configuration(
          cpu, [tf.config.LogicalDeviceConfiguration()] * num_learners)
    except RuntimeError as error:  # Already initialised: fine if the split is there.
      if len(tf.config.list_logical_devices("CPU")) < num_learners:
        raise ValueError(
            f"--num_learners={num_learners} on the CPU needs the CPU split into "
            f"{num_learners} logical devices before TensorFlow starts ({error}).") from error
    devices = [f"/cpu:{i}" for i in range(num_learners)]
  return tf.distribute.MirroredStrategy(devices)
