"""Per-node numpy references of one bow-tie CAVI sweep (Sheinkman & Wade 2025, arXiv 2411.11132, App. A).

Written from the paper's update equations (Algorithm 1), in the style the issue attributes to the authors'
numpy implementation (Python loops over layers and over the hidden/output **nodes** of each layer); *not* a
copy of any reference code.  Two variants, chosen by ``loop_points``:

* ``False`` ("per-node"): every per-node quantity is vectorized over the data points with numpy;
* ``True`` ("per-node x per-point"): the sums over data points and the per-datapoint activation solves are
  Python loops too, with small numpy operations inside (the authors' repository loops this way).

Both cover the *whole* sweep of :meth:`guides.bowtie.cavi.BowtieCAVIGuide.sweep` (IG priors, ``lam = 0``;
no EM):

* ``tau``   (E13) per layer, ``psi`` (E14) per node row;
* ``eta``   (E15) per hidden node with the exact expected squares, output noise shared by the outputs;
* ``omega`` (E17) per hidden node, ``A = sqrt(E[z^2]) / T``;
* ``a``     (E19) backward recursion over layers; the next layer's terms accumulated node by node,
  ``S_{n,l}`` by ``numpy.linalg.inv`` (``S_L`` once: it does not depend on ``n``, App. A);
* ``W{k}``  (E16) one Bayesian linear regression per node, ``np.linalg.inv`` of its (D_{l-1}+1)^2
  precision, then ``rho{k}`` (E18) per node with the new row;
* the output rows (E16) per output node.

The moments ``E[a~]``, ``E[a~ a~^T]`` and ``E[a_{l,d} a~_{l-1}]`` come from the forward recursion over
``q(a)`` (App. A), recomputed at the start of the sweep and after ``q(a)`` as in Algorithm 1.  State and
result are plain dicts of float64 arrays with the guide's buffer names.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["hyper_from_model", "reference_sweep", "state_from_guide", "state_keys"]


def state_keys(num_hidden: int) -> list[str]:
    """Names of the variational parameters a sweep updates (the guide's buffer names)."""
    keys = []
    for k in range(num_hidden + 1):
        keys += [f"m{k}", f"B{k}", f"dtau{k}", f"dpsi{k}"]
    for k in range(num_hidden):
        keys += [f"alpha{k}", f"beta{k}", f"rho{k}", f"A{k}", f"S{k}", f"t{k}", f"M{k}"]
    return keys + ["alpha_out", "beta_out"]


def state_from_guide(guide) -> dict[str, np.ndarray]:
    """A float64 numpy copy of the guide's variational parameters."""
    return {
        key: getattr(guide, key).detach().cpu().double().numpy().copy()
        for key in state_keys(guide.num_hidden)
    }


def hyper_from_model(model) -> dict:
    """Hyperparameters of :class:`zoo.families.bowtie.model.BowtieModel` as floats (after
    ``resolve_data_priors``), with the App. D.1 architecture scaling applied through the prior's own
    ``glob_params``/``loc_params``."""
    if not hasattr(model.prior, "glob_params"):
        raise ValueError("the per-node reference covers the N-GIG shrinkage prior (IG case) only")
    w = tuple(model.widths)
    nh = model.num_hidden
    nu_g, d_g, lam_g = (float(v) for v in model.prior.glob_params(nh))
    loc = [tuple(float(v) for v in model.prior.loc_params(w[k])) for k in range(nh + 1)]
    if lam_g != 0.0 or any(p[2] != 0.0 for p in loc):
        raise ValueError(
            "the per-node reference covers the IG shrinkage priors (lam_glob = lam_loc = 0) only"
        )
    return {
        "widths": w,
        "T": float(model.temperature),
        "nu_glob": nu_g,
        "delta_glob": d_g,
        "nu_loc": [p[0] for p in loc],
        "delta_loc": [p[1] for p in loc],
        "s0": float(model.prior.bias_scale),
        "a0h": float(model.hidden_noise.concentration),
        "b0h": float(model.hidden_noise.rate),
        "a0": float(model.likelihood.concentration),
        "b0": float(model.likelihood.rate),
    }


def _pg_mean(a: np.ndarray) -> np.ndarray:
    """E[omega] under PG(1, A) (Eq. 9), ``tanh(A/2)/(2A)``, Taylor series ``1/4 (1 - y/3 + 2y^2/15)``,
    ``y = (A/2)^2``, near 0."""
    small = np.abs(a) < 1e-3
    safe = np.where(small, 1.0, a)
    y2 = (a / 2.0) ** 2
    return np.where(small, 0.25 * (1.0 - y2 / 3.0 + 2.0 * y2 * y2 / 15.0), np.tanh(safe / 2.0) / (2.0 * safe))


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * v))


def _augmented(mu: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``E[a~]`` and ``E[a~ a~^T]`` for ``a~ = (1, a)`` (App. A); leading data dims allowed."""
    lead = mu.shape[:-1]
    d = mu.shape[-1]
    amean = np.concatenate([np.ones((*lead, 1)), mu], -1)
    aa = np.empty((*lead, d + 1, d + 1))
    aa[..., 0, 0] = 1.0
    aa[..., 0, 1:] = mu
    aa[..., 1:, 0] = mu
    aa[..., 1:, 1:] = second
    return amean, aa


def _forward(x: np.ndarray, st: dict, nh: int, loop_points: bool):
    """Sheinkman & Wade 2025 (arXiv:2411.11132), §2.2:
    ``mu_l = t_l + M_l mu_{l-1}``, ``P_l = S_l + G E[a~a~^T]_{l-1} G^T`` with ``G = [t, M]``;
    returns per layer input ``E[a~]`` (N, D+1), ``E[a~a~^T]`` (N, D+1, D+1), and per hidden layer
    ``E[a_{l,d} a~_{l-1}]`` (N, D_l, D_{l-1}+1) and ``E[a_l a_l^T]`` (N, D_l, D_l)."""
    n = x.shape[0]
    amean, aa = _augmented(x, x[:, :, None] * x[:, None, :])
    ameans, aas, crosses, seconds = [amean], [aa], [], []
    for k in range(nh):
        g = np.concatenate([st[f"t{k}"][:, :, None], st[f"M{k}"]], 2)
        if loop_points:
            cross = np.empty((n, *g.shape[1:]))
            second = np.empty_like(st[f"S{k}"])
            mu = np.empty(st[f"t{k}"].shape)
            for i in range(n):
                cross[i] = g[i] @ aa[i]
                sec = st[f"S{k}"][i] + cross[i] @ g[i].T
                second[i] = 0.5 * (sec + sec.T)
                mu[i] = g[i] @ amean[i]
        else:
            cross = g @ aa
            second = st[f"S{k}"] + cross @ g.transpose(0, 2, 1)
            second = 0.5 * (second + second.transpose(0, 2, 1))
            mu = np.einsum("ndi,ni->nd", g, amean)
        amean, aa = _augmented(mu, second)
        ameans.append(amean)
        aas.append(aa)
        crosses.append(cross)
        seconds.append(second)
    return ameans, aas, crosses, seconds


def reference_sweep(
    x: np.ndarray, y: np.ndarray, state: dict, hp: dict, loop_points: bool = False
) -> tuple[dict, dict]:
    """One CAVI sweep from ``state`` (not modified); returns ``(new_state, seconds per factor)`` with the
    factor names of :meth:`BowtieCAVIGuide.sweep`'s callback (``tau, psi, eta, omega, a, W0, rho0, ...``).
    ``loop_points``: Python loops over the data points too (module docstring)."""
    st = {key: v.copy() for key, v in state.items()}
    w = hp["widths"]
    nh = len(w) - 2
    temp = hp["T"]
    n = x.shape[0]
    y = y.reshape(n, -1)
    times: dict[str, float] = {}
    clock = [time.perf_counter()]

    def tick(name: str) -> None:
        now = time.perf_counter()
        times[name] = now - clock[0]
        clock[0] = now

    def ew2_row(k: int, d: int) -> np.ndarray:  # E[W^2_{l,d,:}]
        return st[f"m{k}"][d, 1:] ** 2 + np.diag(st[f"B{k}"][d])[1:]

    def eww_row(k: int, d: int) -> np.ndarray:  # E[W~^T W~] of row d
        m = st[f"m{k}"][d]
        return st[f"B{k}"][d] + np.outer(m, m)

    def inv_tau(k: int) -> float:  # IG: E[1/x] = -2 nu_hat / delta_hat^2 (App. E.1)
        return -2.0 * (hp["nu_glob"] - 0.5 * w[k + 1] * w[k]) / float(st[f"dtau{k}"]) ** 2

    def inv_psi_row(k: int, d: int) -> np.ndarray:
        return -2.0 * (hp["nu_loc"][k] - 0.5) / st[f"dpsi{k}"][d] ** 2

    def e_prec(k: int, d: int) -> float:  # E[eta^-2] (output: one IG shared by the outputs)
        if k == nh:
            return float(st["alpha_out"] / st["beta_out"])
        return float(st[f"alpha{k}"][d] / st[f"beta{k}"][d])

    def ez2_node(eww: np.ndarray, aa: np.ndarray) -> np.ndarray:  # E[z^2] = Tr(E[W~^T W~] E[a~ a~^T])
        if loop_points:
            return np.array([float(np.sum(eww * aa[i])) for i in range(n)])
        return np.einsum("ij,nij->n", eww, aa)

    # ---- q(tau_l) (E13), per layer, summing node by node
    for k in range(nh + 1):
        acc = hp["delta_glob"] ** 2
        for d in range(w[k + 1]):
            acc += float(np.sum(inv_psi_row(k, d) * ew2_row(k, d)))
        st[f"dtau{k}"] = np.asarray(np.sqrt(acc))
    tick("tau")
    # ---- q(psi) (E14), per node row
    for k in range(nh + 1):
        it = inv_tau(k)
        for d in range(w[k + 1]):
            st[f"dpsi{k}"][d] = np.sqrt(it * ew2_row(k, d) + hp["delta_loc"][k] ** 2)
    tick("psi")
    # ---- q(eta^2) (E15), exact expected squares, per hidden node
    ameans, aas, crosses, seconds = _forward(x, st, nh, loop_points)
    for k in range(nh):
        beta = np.empty(w[k + 1])
        for d in range(w[k + 1]):
            m, eww = st[f"m{k}"][d], eww_row(k, d)
            rho = st[f"rho{k}"][:, d]
            if loop_points:
                acc = 0.0
                for i in range(n):
                    ez2 = float(np.sum(eww * aas[k][i]))
                    acc += seconds[k][i, d, d] - 2.0 * rho[i] * (crosses[k][i, d] @ m) + rho[i] * ez2
            else:
                ez2 = ez2_node(eww, aas[k])
                acc = float(np.sum(seconds[k][:, d, d] - 2.0 * rho * (crosses[k][:, d, :] @ m) + rho * ez2))
            beta[d] = hp["b0h"] + 0.5 * acc
        st[f"alpha{k}"] = np.full(w[k + 1], hp["a0h"] + 0.5 * n)
        st[f"beta{k}"] = beta
    beta_out = hp["b0"]
    for d in range(w[-1]):
        m, eww = st[f"m{nh}"][d], eww_row(nh, d)
        if loop_points:
            for i in range(n):
                ez, ez2 = ameans[nh][i] @ m, float(np.sum(eww * aas[nh][i]))
                beta_out += 0.5 * (y[i, d] ** 2 - 2.0 * y[i, d] * ez + ez2)
        else:
            ez, ez2 = ameans[nh] @ m, ez2_node(eww, aas[nh])
            beta_out += 0.5 * float(np.sum(y[:, d] ** 2 - 2.0 * y[:, d] * ez + ez2))
    st["alpha_out"] = np.asarray(hp["a0"] + 0.5 * n * w[-1])
    st["beta_out"] = np.asarray(beta_out)
    tick("eta")
    # ---- q(omega) (E17), per hidden node (q(a) and W unchanged since the eta step: same moments)
    for k in range(nh):
        for d in range(w[k + 1]):
            st[f"A{k}"][:, d] = np.sqrt(np.maximum(ez2_node(eww_row(k, d), aas[k]), 0.0)) / temp
    tick("omega")
    # ---- q(a_n) (E19), backward recursion l = L..1; next-layer terms node by node
    k_next = t_next = s_next = None
    for k in range(nh - 1, -1, -1):
        d_k = w[k + 1]
        e = st[f"alpha{k}"] / st[f"beta{k}"]
        mk = st[f"m{k}"]
        rho = st[f"rho{k}"]
        h = e * rho * mk[:, 0]  # Sigma^-1 (rho o m^b), (N, D)
        kk = (e * rho)[:, :, None] * mk[:, 1:]  # Sigma^-1 diag(rho) m^W, (N, D, D_prev)
        if k == nh - 1:  # last hidden layer: S_L does not depend on n
            lam = np.diag(e)
            for j in range(w[k + 2]):
                c = e_prec(nh, j)
                ew = eww_row(nh, j)
                lam = lam + c * ew[1:, 1:]
                h = h + c * (y[:, j : j + 1] * st[f"m{nh}"][j, 1:] - ew[1:, 0])
            s1 = np.linalg.inv(lam)
            s1 = 0.5 * (s1 + s1.T)
            s = np.broadcast_to(s1, (n, d_k, d_k)).copy()
            if loop_points:
                t = np.empty((n, d_k))
                mm = np.empty_like(kk)
                for i in range(n):
                    t[i] = s1 @ h[i]
                    mm[i] = s1 @ kk[i]
            else:
                t, mm = h @ s1, s1 @ kk
        else:
            ews = [eww_row(k + 1, j) for j in range(w[k + 2])]
            c = np.stack(
                [
                    e_prec(k + 1, j) * st[f"rho{k + 1}"][:, j] + _pg_mean(st[f"A{k + 1}"][:, j]) / temp**2
                    for j in range(w[k + 2])
                ],
                1,
            )  # (N, D_next)
            lin = (st[f"rho{k + 1}"] - 0.5) / temp
            if loop_points:
                s, t, mm = np.empty((n, d_k, d_k)), np.empty((n, d_k)), np.empty_like(kk)
                for i in range(n):
                    lam_i = np.diag(e)
                    h_i = h[i].copy()
                    for j, ew in enumerate(ews):
                        lam_i = lam_i + c[i, j] * ew[1:, 1:]
                        h_i += lin[i, j] * st[f"m{k + 1}"][j, 1:] - c[i, j] * ew[1:, 0]
                    lam_i = lam_i - k_next[i].T @ s_next[i] @ k_next[i]  # integrating out a_{l+1}
                    h_i += k_next[i].T @ t_next[i]
                    s_i = np.linalg.inv(lam_i)
                    s[i] = 0.5 * (s_i + s_i.T)
                    t[i] = s[i] @ h_i
                    mm[i] = s[i] @ kk[i]
            else:
                lam = np.broadcast_to(np.diag(e), (n, d_k, d_k)).copy()
                for j, ew in enumerate(ews):
                    lam += c[:, j, None, None] * ew[1:, 1:]
                    h = h + np.outer(lin[:, j], st[f"m{k + 1}"][j, 1:]) - np.outer(c[:, j], ew[1:, 0])
                lam -= k_next.transpose(0, 2, 1) @ s_next @ k_next  # integrating out a_{l+1}
                h = h + np.einsum("nji,nj->ni", k_next, t_next)
                s = np.linalg.inv(lam)
                s = 0.5 * (s + s.transpose(0, 2, 1))
                t, mm = np.einsum("nij,nj->ni", s, h), s @ kk
        st[f"S{k}"], st[f"t{k}"], st[f"M{k}"] = s, t, mm
        k_next, t_next, s_next = kk, t, s
    tick("a")
    # ---- q(b, W) (E16) per node, then q(gamma) (E18) per node, layer by layer
    ameans, aas, crosses, _ = _forward(x, st, nh, loop_points)
    for k in range(nh + 1):
        it = inv_tau(k)
        aa, amean = aas[k], ameans[k]
        for d in range(w[k + 1]):
            prec = np.diag(np.concatenate([[1.0 / hp["s0"] ** 2], it * inv_psi_row(k, d)]))
            if k == nh:  # output node: weight E[eta^-2_out] for every point
                c, lin, cross = np.full(n, e_prec(nh, 0)), None, None
                target = e_prec(nh, 0) * y[:, d]
            else:
                e_d, rho = e_prec(k, d), st[f"rho{k}"][:, d]
                c = e_d * rho + _pg_mean(st[f"A{k}"][:, d]) / temp**2
                target, lin, cross = e_d * rho, (rho - 0.5) / temp, crosses[k][:, d, :]
            if loop_points:
                rhs = np.zeros(aa.shape[-1])
                for i in range(n):
                    prec = prec + c[i] * aa[i]
                    rhs = rhs + (target[i] * amean[i] if cross is None else target[i] * cross[i])
                    if lin is not None:
                        rhs = rhs + lin[i] * amean[i]
            else:
                prec = prec + np.einsum("n,nij->ij", c, aa)
                rhs = target @ (amean if cross is None else cross)
                if lin is not None:
                    rhs = rhs + lin @ amean
            cov = np.linalg.inv(0.5 * (prec + prec.T))
            cov = 0.5 * (cov + cov.T)
            st[f"B{k}"][d] = cov
            st[f"m{k}"][d] = cov @ rhs
        tick(f"W{k}")
        if k < nh:
            for d in range(w[k + 1]):
                m, eww, e_d = st[f"m{k}"][d], eww_row(k, d), e_prec(k, d)
                if loop_points:
                    for i in range(n):
                        ez, ez2 = amean[i] @ m, float(np.sum(eww * aa[i]))
                        eaz = crosses[k][i, d] @ m
                        st[f"rho{k}"][i, d] = _sigmoid(ez / temp + e_d * (eaz - 0.5 * ez2))
                else:
                    ez, ez2, eaz = amean @ m, ez2_node(eww, aa), crosses[k][:, d, :] @ m
                    st[f"rho{k}"][:, d] = _sigmoid(ez / temp + e_d * (eaz - 0.5 * ez2))
            tick(f"rho{k}")
    return st, times
