#!/usr/bin/env python3
"""Lane-by-lane simulation of backend/cuda/kernels/attention_mma.cu's index math, in float64.

No GPU is needed: every mma.sync is modelled from the fragment layouts of the PTX ISA ("Matrix
Fragments for mma.m16n8k16" for bf16/fp16, "... m16n8k8" for TF32): the 32 lanes' registers are
gathered into the A, B and C matrices, multiplied, and scattered back. The kernels' loads
(tc_frag_a, tc_frag_bt, tc_frag_b), the C-to-A reuse of p and dS, the masks, the online softmax
and the three kernels' loops are transcribed one for one, and the results are compared with
plain attention (forward, lse, dq, dk, dv) for causal, bidirectional and padded sequences across
the 64-row tiles. Rounding is left out (float64 throughout), so the errors must be ~1e-15 (or
~1e-12 where the reference values are themselves ~1e-16, as when every query sees one key).

It checks the transcription, not the .cu file: change both together. It is slow (pure Python
loops, a few minutes per mode); it needs only numpy.

    python3 tools/reference/attention_mma_sim.py k16   # bf16 / fp16 kernels
    python3 tools/reference/attention_mma_sim.py k8    # TF32 kernels
"""
import numpy as np, sys
MODE=sys.argv[1] if len(sys.argv)>1 else 'k16'
KS=16 if MODE=='k16' else 8
RS=72; TILE=64; HS=64
lanes=np.arange(32); G=lanes>>2; Q=lanes&3

def frag_a(sh, r0, k0):
    if MODE=='k8':
        a=np.zeros((32,4))
        for L in range(32):
            g,q=G[L],Q[L]
            a[L]=[sh[r0+g,k0+2*q],sh[r0+g+8,k0+2*q],sh[r0+g,k0+2*q+1],sh[r0+g+8,k0+2*q+1]]
        return a  # sh: 2-D array [rows][RS]; returns a[lane][8] (element pairs flattened)
    a=np.zeros((32,8))
    for L in range(32):
        g,q=G[L],Q[L]
        p=lambda r,c: sh[r0+r, k0+c]
        a[L]=[p(g,2*q),p(g,2*q+1),p(g+8,2*q),p(g+8,2*q+1),p(g,8+2*q),p(g,8+2*q+1),p(g+8,8+2*q),p(g+8,8+2*q+1)]
    return a
def frag_bt(sh,n0,k0):
    if MODE=='k8':
        b=np.zeros((32,2))
        for L in range(32):
            g,q=G[L],Q[L]
            b[L]=[sh[n0+g,k0+2*q],sh[n0+g,k0+2*q+1]]
        return b
    b=np.zeros((32,4))
    for L in range(32):
        g,q=G[L],Q[L]
        row=sh[n0+g]
        b[L]=[row[k0+2*q],row[k0+2*q+1],row[k0+8+2*q],row[k0+8+2*q+1]]
    return b
def frag_b(sh,k0,n0):
    if MODE=='k8':
        b=np.zeros((32,2))
        for L in range(32):
            g,q=G[L],Q[L]
            b[L]=[sh[k0+2*q,n0+g],sh[k0+2*q+1,n0+g]]
        return b
    b=np.zeros((32,4))
    for L in range(32):
        g,q=G[L],Q[L]
        b[L]=[sh[k0+2*q,n0+g],sh[k0+2*q+1,n0+g],sh[k0+8+2*q,n0+g],sh[k0+8+2*q+1,n0+g]]
    return b
def mma(c,a,b):  # c[32][4]
    if MODE=='k8':
        A=np.zeros((16,8)); B=np.zeros((8,8)); C=np.zeros((16,8))
        for L in range(32):
            g,q=G[L],Q[L]
            A[g,q],A[g+8,q],A[g,q+4],A[g+8,q+4]=a[L]
            B[q,g],B[q+4,g]=b[L]
            C[g,2*q],C[g,2*q+1],C[g+8,2*q],C[g+8,2*q+1]=c[L]
        D=A@B+C
        out=np.zeros((32,4))
        for L in range(32):
            g,q=G[L],Q[L]
            out[L]=[D[g,2*q],D[g,2*q+1],D[g+8,2*q],D[g+8,2*q+1]]
        return out
    A=np.zeros((16,16)); B=np.zeros((16,8)); C=np.zeros((16,8))
    for L in range(32):
        g,q=G[L],Q[L]
        A[g,2*q],A[g,2*q+1],A[g+8,2*q],A[g+8,2*q+1],A[g,8+2*q],A[g,8+2*q+1],A[g+8,8+2*q],A[g+8,8+2*q+1]=a[L]
        B[2*q,g],B[2*q+1,g],B[8+2*q,g],B[8+2*q+1,g]=b[L]
        C[g,2*q],C[g,2*q+1],C[g+8,2*q],C[g+8,2*q+1]=c[L]
    D=A@B+C
    out=np.zeros((32,4))
    for L in range(32):
        g,q=G[L],Q[L]
        out[L]=[D[g,2*q],D[g,2*q+1],D[g+8,2*q],D[g+8,2*q+1]]
    return out
def a_from_c(c0,c1):
    a=np.zeros((32,8))
    for L in range(32):
        a[L]=[c0[L][0],c0[L][1],c0[L][2],c0[L][3],c1[L][0],c1[L][1],c1[L][2],c1[L][3]]
    return a
def qk(A,r0,M):
    s=[np.zeros((32,4)) for _ in range(8)]
    for k in range(64//KS):
        a=frag_a(A,r0,k*KS)
        for j in range(8): s[j]=mma(s[j],a,frag_bt(M,8*j,k*KS))
    return s
def pv(acc,p,M):
    for k in range(64//KS):
        if MODE=='k8':
            a=np.array([[p[k][L][0],p[k][L][2],p[k][L][1],p[k][L][3]] for L in range(32)])
        else:
            a=a_from_c(p[2*k],p[2*k+1])
        for n in range(8): acc[n]=mma(acc[n],a,frag_b(M,k*KS,8*n))
    return acc
def load(X,r0,T):  # X [T][HS] -> tile [64][RS]
    sh=np.zeros((TILE,RS))
    for r in range(TILE):
        if r0+r<T: sh[r,:HS]=X[r0+r]
    return sh
def key_end(t,ln,causal): return min(t+1,ln) if causal else ln
def first_query(u,causal): return u if causal else 0
LOG2E=1.4426950408889634; sl2=0.125*LOG2E

def forward(Qm,Km,Vm,T,ln,causal):
    tiles=(T+63)//64; out=np.zeros((T,HS)); lse=np.zeros(T)
    for qt in range(tiles):
        Qs=load(Qm,qt*64,T)
        keyEnd=key_end(min(qt*64+64,T)-1,ln,causal)
        for w in range(4):
            row=qt*64+16*w+G
            ke=[np.array([key_end(min(r,T-1),ln,causal) for r in row]), np.array([key_end(min(r+8,T-1),ln,causal) for r in row])]
            m=[np.full(32,-np.inf),np.full(32,-np.inf)]; l=[np.zeros(32),np.zeros(32)]
            o=[np.zeros((32,4)) for _ in range(8)]
            kt=0
            while kt*64<keyEnd:
                Ks=load(Km,kt*64,T); Vs=load(Vm,kt*64,T)
                s=qk(Qs,16*w,Ks)
                mx=[m[0].copy(),m[1].copy()]
                for j in range(8):
                    for e in range(4):
                        u=kt*64+8*j+2*Q+(e&1); hr=e>>1
                        s[j][:,e]=np.where(u<ke[hr], s[j][:,e]*sl2, -np.inf)
                        mx[hr]=np.maximum(mx[hr],s[j][:,e])
                corr=[None,None]
                for hr in range(2):
                    mx[hr]=np.maximum(mx[hr],mx[hr][lanes^1]); mx[hr]=np.maximum(mx[hr],mx[hr][lanes^2])
                    corr[hr]=np.exp2(m[hr]-mx[hr]); m[hr]=mx[hr]; l[hr]=l[hr]*corr[hr]
                for j in range(8):
                    for e in range(4):
                        s[j][:,e]=np.exp2(s[j][:,e]-m[e>>1]); l[e>>1]=l[e>>1]+s[j][:,e]
                for n in range(8):
                    o[n][:,0]*=corr[0];o[n][:,1]*=corr[0];o[n][:,2]*=corr[1];o[n][:,3]*=corr[1]
                o=pv(o,s,Vs)
                kt+=1
            for hr in range(2):
                l[hr]=l[hr]+l[hr][lanes^1]; l[hr]=l[hr]+l[hr][lanes^2]
                for L in range(32):
                    r=row[L]+8*hr
                    if Q[L]==0 and r<T: lse[r]=(m[hr][L]+np.log2(l[hr][L]))*np.log(2)
            for L in range(32):
                for hr in range(2):
                    r=row[L]+8*hr
                    if r<T:
                        for n in range(8):
                            out[r,8*n+2*Q[L]]=o[n][L,2*hr]/l[hr][L]; out[r,8*n+2*Q[L]+1]=o[n][L,2*hr+1]/l[hr][L]
    return out,lse

def store(dst,acc,scale,row,T):
    for L in range(32):
        for hr in range(2):
            r=row[L]+8*hr
            if r<T:
                for n in range(8):
                    dst[r,8*n+2*Q[L]]=acc[n][L,2*hr]*scale; dst[r,8*n+2*Q[L]+1]=acc[n][L,2*hr+1]*scale

def backward_dq(Qm,Km,Vm,dO,lse,delta,T,ln,causal):
    tiles=(T+63)//64; dq=np.full((T,HS),np.nan)
    for qt in range(tiles):
        Qs=load(Qm,qt*64,T); Os=load(dO,qt*64,T)
        keyEnd=key_end(min(qt*64+64,T)-1,ln,causal)
        for w in range(4):
            row=qt*64+16*w+G
            rc=[np.minimum(row,T-1),np.minimum(row+8,T-1)]
            ke=[np.array([key_end(r,ln,causal) for r in rc[hr]]) for hr in range(2)]
            Lv=[lse[rc[hr]]*LOG2E for hr in range(2)]; Dv=[delta[rc[hr]] for hr in range(2)]
            acc=[np.zeros((32,4)) for _ in range(8)]
            kt=0
            while kt*64<keyEnd:
                Ks=load(Km,kt*64,T); Vs=load(Vm,kt*64,T)
                s=qk(Qs,16*w,Ks); dp=qk(Os,16*w,Vs)
                for j in range(8):
                    for e in range(4):
                        u=kt*64+8*j+2*Q+(e&1); hr=e>>1
                        p=np.exp2(np.where(u<ke[hr], s[j][:,e]*sl2-Lv[hr], -np.inf))
                        s[j][:,e]=p*(dp[j][:,e]-Dv[hr])
                acc=pv(acc,s,Ks)
                kt+=1
            store(dq,acc,0.125,row,T)
    return dq

def backward_dkv(Qm,Km,Vm,dO,lse,delta,T,ln,causal):
    tiles=(T+63)//64; dk=np.full((T,HS),np.nan); dv=np.full((T,HS),np.nan)
    for kt in range(tiles):
        Ks=load(Km,kt*64,T); Vs=load(Vm,kt*64,T)
        for w in range(4):
            row=kt*64+16*w+G
            fq=[np.array([first_query(r+8*hr,causal) if r+8*hr<ln else T for r in row]) for hr in range(2)]
            accK=[np.zeros((32,4)) for _ in range(8)]; accV=[np.zeros((32,4)) for _ in range(8)]
            qt = first_query(kt*64,causal)//64 if kt*64<ln else tiles
            while qt<tiles:
                Qs=load(Qm,qt*64,T); Os=load(dO,qt*64,T)
                Ls=np.array([lse[qt*64+i]*LOG2E if qt*64+i<T else np.inf for i in range(64)])
                Dl=np.array([delta[qt*64+i] if qt*64+i<T else 0 for i in range(64)])
                s=qk(Ks,16*w,Qs); dp=qk(Vs,16*w,Os)
                for j in range(8):
                    for e in range(4):
                        c=8*j+2*Q+(e&1); hr=e>>1
                        p=np.exp2(np.where(qt*64+c>=fq[hr], s[j][:,e]*sl2-Ls[c], -np.inf))
                        s[j][:,e]=p; dp[j][:,e]=p*(dp[j][:,e]-Dl[c])
                accV=pv(accV,s,Os); accK=pv(accK,dp,Qs)
                qt+=1
            store(dk,accK,0.125,row,T); store(dv,accV,1.0,row,T)
    return dk,dv

def reference(Qm,Km,Vm,dO,T,ln,causal):
    S=Qm@Km.T*0.125
    mask=np.array([[u<key_end(t,ln,causal) for u in range(T)] for t in range(T)])
    S=np.where(mask,S,-np.inf)
    mx=S.max(1,keepdims=True); P=np.exp(S-mx); l=P.sum(1,keepdims=True); P/=l
    out=P@Vm; lse=(mx+np.log(l))[:,0]
    dP=dO@Vm.T; delta=(dO*out).sum(1)
    dS=P*(dP-delta[:,None])
    dq=dS@Km*0.125; dk=dS.T@Qm*0.125; dv=P.T@dO
    return out,lse,dq,dk,dv,delta

rng=np.random.default_rng(1)
worst=0.0
for T,ln,causal in [(130,130,1),(130,130,0),(130,65,0),(130,65,1),(37,1,0),(64,64,1),(1,1,1)]:
    Qm,Km,Vm,dO=[rng.uniform(-2,2,(T,HS)) for _ in range(4)]
    out,lse,dq,dk,dv,delta=reference(Qm,Km,Vm,dO,T,ln,causal)
    o2,l2=forward(Qm,Km,Vm,T,ln,causal)
    dq2=backward_dq(Qm,Km,Vm,dO,lse,delta,T,ln,causal)
    dk2,dv2=backward_dkv(Qm,Km,Vm,dO,lse,delta,T,ln,causal)
    err=lambda a,b: np.abs(a-b).max()/max(np.abs(a).max(),1e-3)
    e=[err(out,o2),err(lse,l2),err(dq,dq2),err(dk,dk2),err(dv,dv2)]
    worst=max([worst]+e)
    print(MODE,"T=%d len=%d causal=%d"%(T,ln,causal),"out %.1e lse %.1e dq %.1e dk %.1e dv %.1e"%tuple(e))
print("largest relative error %.1e"%worst)
sys.exit(0 if worst < 1e-9 else 1)
