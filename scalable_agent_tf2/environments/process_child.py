"""The child's side of an environment process (process.py): it builds the environment, then
serves the parent's requests over the pipe until told to close or the parent is gone.

What the child imports is what this module imports (multiprocessing's "spawn" unpickles
`child_main` by its module path): no TensorFlow (docs/ARCHITECTURE.md "Rooms").

Protocol: the parent sends (command, payload) with command "initial", "step",
"attach_frame_buffer", "render", "render_fps" or "close"; the child answers (OK, result) or
(ERROR, exception, formatted traceback). Its first message is (OK, spec) or the
constructor's error.
"""
import ctypes
import multiprocessing
import multiprocessing.reduction
import multiprocessing.shared_memory
import os
import signal
import subprocess
import sys
import traceback

import numpy as np

from scalable_agent_tf2.environments import base

# linux/prctl.h.
_PR_SET_PDEATHSIG = 1

# The first element of every reply.
OK = "ok"
ERROR = "error"


def _die_with_parent(parent_pid):
  """In the child: get SIGKILL when the parent dies; exit now if it is already gone."""
  if sys.platform.startswith("linux"):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
      raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
  if os.getppid() != parent_pid:  # The parent died before prctl took effect.
    os._exit(1)  # pylint: disable=protected-access


def _picklable_exception(exception):
  """The exception itself if it survives pickling, else a RuntimeError describing it."""
  try:
    multiprocessing.reduction.ForkingPickler.loads(
        multiprocessing.reduction.ForkingPickler.dumps(exception))
    return exception
  except Exception:  # pylint: disable=broad-except
    return RuntimeError("%s: %s" % (type(exception).__name__, exception))


def _error_reply(exception):
  return (ERROR, _picklable_exception(exception), traceback.format_exc())


def _pack_output(env_output, frame_buffer):
  """EnvOutput -> a plain tuple for the pipe; the frame goes to frame_buffer when there is one."""
  frame = env_output.observation.frame
  if frame_buffer is not None:
    np.copyto(frame_buffer, frame)
    frame = None
  return (env_output.reward, env_output.done, frame, env_output.observation.instruction,
          env_output.episode_return, env_output.episode_step, env_output.truncated)


def _send_output_to(path):
  """In the child: file descriptors 1 and 2 (C code's output too) append to `path`."""
  fd = os.open(path, os.O_WRONLY | os.O_APPEND)
  sys.stdout.flush()
  sys.stderr.flush()
  os.dup2(fd, 1)
  os.dup2(fd, 2)
  os.close(fd)


def _own_process_group():
  """In the child: lead a process group of its own, which its children (DeepMind Lab's map
  compilers: compile_map.sh, q3map2, bspc) join, so that process.py's _shut_down ends them
  all at once."""
  try:
    os.setpgid(0, 0)
  except OSError:  # Already a group leader (the parent's setpgid came first).
    pass


def _start_group_reaper():
  """In the child: a shell in the child's process group that SIGKILLs the whole group once
  the child is gone, however it went.

  PR_SET_PDEATHSIG kills the child when the run is SIGKILLed, but the child's own children
  (DeepMind Lab's map compilers) are then reparented to init and run on for minutes (14
  survivors of one dmlab30 run, measured). The shell blocks on a pipe whose only writer is this
  process (os.pipe's ends are not inherited by what the child starts), so it costs nothing
  until the child dies, when it reads end-of-file and kills the group, itself included.
  """
  read_end, write_end = os.pipe()
  try:
    subprocess.Popen(["/bin/sh", "-c", f"read _; kill -9 -{os.getpgrp()}"],
                     stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     close_fds=True)
  except OSError:  # No /bin/sh: the parent's _shut_down still ends the group at a clean stop.
    os.close(write_end)
  os.close(read_end)
  # write_end stays open, unused, for the child's lifetime: the kernel closes it at its death.


def child_main(conn, constructor, args, kwargs, parent_pid, output_path=None):
  """The child's loop: build the environment, then serve (command, payload) requests."""
  _own_process_group()
  _die_with_parent(parent_pid)
  _start_group_reaper()
  if output_path:
    _send_output_to(output_path)
  # The parent decides when its children stop (the child's own process group keeps a
  # terminal's Ctrl-C away; SIG_IGN covers a child that could not leave the parent's group).
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    env = constructor(*args, **kwargs)
    spec = env.spec
  except Exception as e:  # pylint: disable=broad-except
    conn.send(_error_reply(e))
    return
  conn.send((OK, spec))
  shared = None
  frame_buffer = None
  try:
    while True:
      try:
        command, payload = conn.recv()
      except EOFError:  # The parent is gone.
        break
      try:
        if command == "step":
          result = _pack_output(env.step(payload), frame_buffer)
        elif command == "initial":
          result = _pack_output(env.initial(), frame_buffer)
        elif command == "render":  # Test mode's videos: pickled, the frame buffer is not.
          result = env.render()
        elif command == "render_fps":
          result = env.render_fps()
        elif command == "attach_frame_buffer":
          shared = multiprocessing.shared_memory.SharedMemory(name=payload)
          frame_buffer = np.ndarray(spec.frame_shape, base.frame_dtype(spec), buffer=shared.buf)
          result = None
        elif command == "close":
          env.close()
          conn.send((OK, None))
          break
        else:
          raise ValueError("Unknown command %r." % (command,))
      except Exception as e:  # pylint: disable=broad-except
        conn.send(_error_reply(e))
      else:
        conn.send((OK, result))
  finally:
    del frame_buffer  # Releases the view so that the segment can be closed.
    if shared is not None:
      shared.close()
